"""Tables of the documentation generated from the specification at build time.

Directives (usable from MyST as ```` ```{register-map} ```` blocks):

* ``register-map``: every register of ``trainingcxl.spec.registers.REGISTERS``
  (word address, name, access, kind, description);
* ``register-fields``: a field table for each register with more than one field;
* ``descriptor-ops``: the descriptor operations (``Op`` and ``OP_MEANINGS``);
* ``error-codes``: the error codes (``ErrorCode`` and ``ERROR_MEANINGS``).

Nothing about the registers is written by hand: the pages follow the
specification whenever it changes.
"""

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def _cell(content):
    entry = nodes.entry()
    if isinstance(content, nodes.Node):
        entry += nodes.paragraph("", "", content)
    else:
        entry += nodes.paragraph(text=str(content))
    return entry


def _table(headers, rows, widths=None, classes=()):
    table = nodes.table(classes=list(classes))
    group = nodes.tgroup(cols=len(headers))
    table += group
    for w in widths or [1] * len(headers):
        group += nodes.colspec(colwidth=w)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for h in headers:
        row += _cell(h)
    head += row
    body = nodes.tbody()
    group += body
    for r in rows:
        row = nodes.row()
        for c in r:
            row += _cell(c)
        body += row
    return table


def _lit(text):
    return nodes.literal(text=text)


def register_anchor(name):
    return "reg-" + name.lower().replace("_", "-")


def _bits(field):
    hi = field.offset + field.width - 1
    return str(field.offset) if field.width == 1 else f"{hi}:{field.offset}"


class RegisterMap(SphinxDirective):
    """The table of all registers."""

    def run(self):
        from trainingcxl.spec.registers import REGISTERS
        rows = []
        for r in REGISTERS:
            name = nodes.inline()
            if len(r.fields) > 1:
                ref = nodes.reference("", "", refid=register_anchor(r.name))
                ref += _lit(r.name)
                name += ref
            else:
                name += _lit(r.name)
            rows.append((_lit(f"0x{r.addr:02X}"), name, r.access.value, r.kind.value, r.doc))
        return [_table(("address", "name", "access", "kind", "description"), rows,
                       widths=(1, 3, 1, 2, 8))]


class RegisterFields(SphinxDirective):
    """A field table for every register with more than one field."""

    def run(self):
        from trainingcxl.spec.registers import REGISTERS
        out = []
        for r in REGISTERS:
            if len(r.fields) <= 1:
                continue
            title = nodes.rubric(ids=[register_anchor(r.name)])
            title += _lit(r.name)
            title += nodes.Text(f" (address 0x{r.addr:02X}, {r.access.value}): {r.doc}")
            out.append(title)
            rows = [(_lit(_bits(f)), _lit(f.name), f.doc) for f in r.fields]
            out.append(_table(("bits", "name", "meaning"), rows, widths=(1, 2, 8)))
        return out


class DescriptorOps(SphinxDirective):
    """The descriptor operations."""

    def run(self):
        from trainingcxl.spec.descriptors import OP_MEANINGS, Op
        rows = [(_lit(str(op.value)), _lit(op.name), OP_MEANINGS[op]) for op in Op]
        return [_table(("value", "operation", "what it does"), rows, widths=(1, 2, 8))]


class ErrorCodes(SphinxDirective):
    """The error codes of a descriptor's completion."""

    def run(self):
        from trainingcxl.spec.descriptors import ERROR_MEANINGS, ErrorCode
        rows = [(_lit(str(code.value)), _lit(code.name), ERROR_MEANINGS[code]) for code in ErrorCode]
        return [_table(("value", "code", "meaning"), rows, widths=(1, 2, 8))]


def setup(app):
    app.add_directive("register-map", RegisterMap)
    app.add_directive("register-fields", RegisterFields)
    app.add_directive("descriptor-ops", DescriptorOps)
    app.add_directive("error-codes", ErrorCodes)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

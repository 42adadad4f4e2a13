"""A wheel built from the checkout installs a complete ``trainingcxl``.

The editable install that run.sh makes maps each layer folder whole, so a
subpackage the wheel leaves out still imports there. This test builds a wheel
from a copy of the checkout, installs it into a new virtual environment that
sees the development environment's dependencies but neither the checkout nor
its editable finder, imports every module the checkout has, and runs the
installed ``trainingcxl --help``.
"""

import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: Package name -> layer folder, e.g. "trainingcxl.hdl" -> "hdl".
LAYERS = CONFIG["tool"]["setuptools"]["package-dir"]


def copy_checkout(dest):
    """The files of the top-level folder and the layers (which is what the build
    reads), without bytecode or hidden files; a file that vanishes while it is
    copied (an editor saving) is left out."""
    def copy(src, dst):
        try:
            return shutil.copy2(src, dst)
        except FileNotFoundError:
            return dst
    ignore = shutil.ignore_patterns("__pycache__", ".*")
    dest.mkdir()
    for path in ROOT.iterdir():
        if path.is_file() and not path.name.startswith("."):
            copy(path, dest / path.name)
    for folder in LAYERS.values():
        shutil.copytree(ROOT / folder, dest / folder, ignore=ignore, copy_function=copy)


def layer_files(root):
    """Wheel path -> path of every file the layers below ``root`` hold."""
    files = {}
    for package, folder in LAYERS.items():
        base = root / folder
        for path in base.rglob("*"):
            rel = path.relative_to(base)
            if path.is_file() and "__pycache__" not in rel.parts \
                    and not any(part.startswith(".") for part in rel.parts):
                files["/".join((*package.split("."), *rel.parts))] = path
    return files


def module_names(files):
    names = []
    for member in files:
        if member.endswith(".py"):
            parts = member[:-3].split("/")
            if parts[-1] == "__init__":
                parts.pop()
            names.append(".".join(parts))
    return sorted(names)


def setuptools_can_build():
    """Whether this environment's setuptools meets the build-system requirement
    (then the wheel builds offline, without an isolated build environment)."""
    (need,) = CONFIG["build-system"]["requires"]
    assert need.startswith("setuptools>="), need
    try:
        have = version("setuptools")
    except Exception:
        return False
    as_tuple = lambda v: tuple(int(x) for x in v.split(".")[:2] if x.isdigit())
    return as_tuple(have) >= as_tuple(need.removeprefix("setuptools>="))


# Runs inside the new environment: imports each module and reports where it came from.
IMPORT_ALL = r"""
import importlib, json, sys, traceback
failed = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except BaseException:
        failed[name] = traceback.format_exc(limit=-3)
files = sorted(m.__file__ for n, m in list(sys.modules.items())
               if (n == "trainingcxl" or n.startswith("trainingcxl."))
               and getattr(m, "__file__", None))   # namespace packages have none
paths = list(sys.modules["trainingcxl"].__path__) if "trainingcxl" in sys.modules else []
finders = [type(f).__module__ + "." + getattr(f, "__name__", type(f).__name__)
           for f in sys.meta_path] + [repr(h) for h in sys.path_hooks]
print(json.dumps({"failed": failed, "files": files, "paths": paths,
                  "finders": finders, "sys_path": sys.path}))
"""


def test_wheel_installs_every_module(tmp_path):
    # Build from a copy: setuptools reuses build/ between builds, so a build in
    # the checkout could ship files a previous build left there; and the files
    # expected in the wheel are read from the copy, which others' edits of the
    # checkout do not change meanwhile.
    src = tmp_path / "src"
    copy_checkout(src)
    # Folders beside the layers never become packages.
    for stray in ("docs", "tests", ".cache/stray", ".venv/stray", "stray"):
        (src / stray).mkdir(parents=True)
        (src / stray / "__init__.py").write_text("")
    offline = ["--no-build-isolation"] if setuptools_can_build() else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *offline,
                    "--wheel-dir", str(tmp_path / "dist"), str(src)], check=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("trainingcxl-*.whl")

    expected = layer_files(src)
    members = set(zipfile.ZipFile(wheel).namelist())
    shipped = {m for m in members if not m.split("/")[0].endswith(".dist-info")}
    left_out = sorted(set(expected) - shipped)
    assert not left_out, f"the wheel leaves out files of the layers: {left_out}"
    foreign = sorted(shipped - set(expected))
    assert not foreign, f"the wheel holds files from outside the layers: {foreign}"

    # Install into a new environment first, so that pip sees no other trainingcxl;
    # then let it see the dependencies installed here through a plain path
    # entry, which (unlike a site directory) runs none of that directory's .pth
    # files, so the editable install's finder stays out.
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                    "--quiet", "--no-deps", "--no-index", str(wheel)], check=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    deps = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    (site / "zz_dependencies.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))

    run_env = {"PATH": f"{env / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    modules = module_names(expected)
    assert len(modules) > 80, "the checkout's modules were not found"
    result = subprocess.run([str(python), "-c", IMPORT_ALL, json.dumps(modules)], cwd=tmp_path,
                            env=run_env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    failed = {name: tb.strip().splitlines()[-1] for name, tb in report["failed"].items()}
    assert not failed, f"modules that do not import from the wheel: {failed}"
    # Every module came from the new environment, none through the editable finder.
    assert not any("editable" in f.lower() for f in report["finders"]), report["finders"]
    assert str(ROOT) not in report["sys_path"], report["sys_path"]
    outside = [f for f in report["files"] + report["paths"] if not f.startswith(str(site))]
    assert outside == [], outside

    cli = subprocess.run([str(env / "bin" / "trainingcxl"), "--help"], cwd=tmp_path,
                         env=run_env, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith("usage: trainingcxl"), cli.stdout

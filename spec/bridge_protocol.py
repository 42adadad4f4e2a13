"""The framed protocol of the UART host bridge (shared by the RTL and the host driver).

Every request is ``0x5A, command, payload, crc`` and gets exactly one response
``0xA5, status, payload, crc``. Payload lengths are fixed per command (below;
the response has its full length whatever the status, zero-filled), numbers
are little-endian, and ``crc`` is CRC-8 (polynomial 0x07, initial value 0) over
every byte between the sync byte and the CRC.

A request with a bad CRC is answered ``BAD_CRC`` and not executed. An unknown
command is answered ``BAD_COMMAND`` at once and the bridge hunts for the next
sync byte; a request that stops for more than :data:`IDLE_TIMEOUT_BITS` bit
times is dropped without an answer. The host resynchronizes after a garbled
response by staying silent for longer than that and discarding what arrived.
"""

import enum

__all__ = ["REQ_SYNC", "RSP_SYNC", "Command", "Status", "REQ_LEN", "RSP_LEN", "BOARD_MAGIC",
           "IDLE_TIMEOUT_BITS", "POWER_FAIL_CYCLES", "crc8", "encode_request", "FrameError",
           "decode_response", "MAX_REQ_PAYLOAD", "MAX_RSP_PAYLOAD"]

REQ_SYNC = 0x5A
RSP_SYNC = 0xA5
#: ``PING`` answers this in its first four bytes ("TCXB").
BOARD_MAGIC = 0x42584354
#: A request whose next byte is this many bit times late is dropped.
IDLE_TIMEOUT_BITS = 64
#: Cycles the bridge holds ``power_fail`` for one ``POWER_FAIL`` command or button press.
POWER_FAIL_CYCLES = 16


class Command(enum.IntEnum):
    PING = 0x00             # -> magic (4) | host window lines (2) | bridge version (2)
    REG_READ = 0x01         # register (1) -> value (8)
    REG_WRITE = 0x02        # register (1), value (8)
    MEM_READ = 0x03         # line address (6) -> line (64); CXL.mem MemRd
    MEM_WRITE = 0x04        # line address (6), line (64); CXL.mem MemWr
    HOST_READ = 0x05        # host window line (2) -> line (64)
    HOST_WRITE = 0x06       # host window line (2), line (64)
    POWER_FAIL = 0x07       # cut the device's power for POWER_FAIL_CYCLES cycles
    STATE = 0x08            # -> leds (1) | irq (1) | power failures by command (2) | by button (2) | bad frames (2)


class Status(enum.IntEnum):
    OK = 0
    BAD_CRC = 1
    BAD_COMMAND = 2
    MEM_ERROR = 3           # CXL.mem answered CmpErr or poisoned data
    REG_ERROR = 4           # the control window refused the register
    OUT_OF_WINDOW = 5       # host window line out of range
    POWER_LOST = 6          # a power failure cut the request short (button)
    TIMEOUT = 7             # the device did not answer


REQ_LEN = {Command.PING: 0, Command.REG_READ: 1, Command.REG_WRITE: 9, Command.MEM_READ: 6,
           Command.MEM_WRITE: 70, Command.HOST_READ: 2, Command.HOST_WRITE: 66,
           Command.POWER_FAIL: 0, Command.STATE: 0}
RSP_LEN = {Command.PING: 8, Command.REG_READ: 8, Command.REG_WRITE: 0, Command.MEM_READ: 64,
           Command.MEM_WRITE: 0, Command.HOST_READ: 64, Command.HOST_WRITE: 0,
           Command.POWER_FAIL: 0, Command.STATE: 8}
MAX_REQ_PAYLOAD = max(REQ_LEN.values())
MAX_RSP_PAYLOAD = max(RSP_LEN.values())


class FrameError(IOError):
    """A response frame that cannot be decoded (lost sync, bad CRC, wrong length)."""


def crc8(data, crc=0):
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def encode_request(command, payload=b""):
    command = Command(command)
    payload = bytes(payload)
    if len(payload) != REQ_LEN[command]:
        raise ValueError(f"{command.name} takes {REQ_LEN[command]} payload bytes, not {len(payload)}")
    body = bytes([command]) + payload
    return bytes([REQ_SYNC]) + body + bytes([crc8(body)])


def decode_response(command, frame):
    """``frame`` (the whole response) -> ``(Status, payload)``; raises :class:`FrameError`."""
    command = Command(command)
    want = RSP_LEN[command] + 3
    if len(frame) != want:
        raise FrameError(f"{command.name}: response of {len(frame)} bytes, expected {want}")
    if frame[0] != RSP_SYNC:
        raise FrameError(f"{command.name}: response starts with {frame[0]:#04x}, not {RSP_SYNC:#04x}")
    if crc8(frame[1:-1]) != frame[-1]:
        raise FrameError(f"{command.name}: response CRC {frame[-1]:#04x} does not match "
                         f"{crc8(frame[1:-1]):#04x}")
    try:
        status = Status(frame[1])
    except ValueError:
        raise FrameError(f"{command.name}: unknown status {frame[1]}") from None
    return status, bytes(frame[2:-1])

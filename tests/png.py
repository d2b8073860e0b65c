"""png.py - just enough PNG for the browser test: read an 8-bit RGB/RGBA
non-interlaced PNG (what Chromium's screenshots are) into rows of pixels,
and write a crop of one back, with the standard library only.

    python3 tests/png.py crop IN.png X Y W H OUT.png
"""
import struct
import sys
import zlib


def read(path):
    """(width, height, channels, rows): rows[y] is a bytes of width*channels."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(path + ": not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError(path + ": only 8-bit RGB/RGBA, non-interlaced")
    ch = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * ch
    rows, prev, off = [], bytearray(stride), 0
    for _ in range(h):
        f = raw[off]
        line = bytearray(raw[off + 1:off + 1 + stride])
        off += 1 + stride
        for i in range(stride):
            a = line[i - ch] if i >= ch else 0
            b = prev[i]
            c = prev[i - ch] if i >= ch else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, ch, rows


def write(path, w, h, ch, rows):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    raw = b"".join(b"\x00" + r for r in rows)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2 if ch == 3 else 6, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 6)))
        f.write(chunk(b"IEND", b""))


def ink(rows, ch, x, y, w, h, level=200):
    """How many pixels of the box have a channel darker than level: text,
    lines and fills, but not the pale grid and background tints."""
    n = 0
    for r in rows[y:y + h]:
        for i in range(x * ch, (x + w) * ch, ch):
            if r[i] < level or r[i + 1] < level or r[i + 2] < level:
                n += 1
    return n


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "crop":
        w, h, ch, rows = read(sys.argv[2])
        x, y, cw, chh = map(int, sys.argv[3:7])
        cw, chh = min(cw, w - x), min(chh, h - y)
        write(sys.argv[7], cw, chh, ch, [r[x * ch:(x + cw) * ch] for r in rows[y:y + chh]])
    else:
        sys.exit(__doc__)

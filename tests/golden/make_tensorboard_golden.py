#!/usr/bin/env python3
"""TensorBoard's own encoding of the events sdtrain writes (train/tensorboard.h): the file-version
event, scalars (as torch's SummaryWriter.add_scalar writes them: simple_value) and a PNG image,
each serialized by tensorboard's protobuf classes and framed by its RecordWriter, into
tests/golden/data/tensorboard/events.bin; then read back with tensorboard's EventAccumulator as a
check. The C++ test writes the same events and compares the bytes. Deterministic.

  ~/venv-golden/bin/python tests/golden/make_tensorboard_golden.py
"""
import io
import json
import os
import struct
import tempfile
import zlib

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tensorboard")


def png_rgb(w, h):
    raw = b"".join(b"\x00" + bytes(((x * 40 + y * 7) % 256, (x * 3) % 256, (y * 50) % 256)[c]
                                   for x in range(w) for c in range(3)) for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


# (tag, value, step, wall_time): what the C++ test writes too.
SCALARS = [("loss/current", 0.125, 1, 1700000001.25), ("loss/average", 0.125, 1, 1700000001.25),
           ("lr/unet", 1e-4, 1, 1700000001.25), ("loss/current", 0.0, 2, 1700000002.5),
           ("loss/current", -3.5e-7, 300, 1700000100.0), ("lr/textencoder", 5e-05, 0, 1700000000.75)]


def main():
    os.makedirs(OUT, exist_ok=True)
    png = png_rgb(5, 3)
    with open(os.path.join(OUT, "image.png"), "wb") as f:
        f.write(png)
    events = [event_pb2.Event(wall_time=1700000000.5, file_version="brain.Event:2",
                              source_metadata=event_pb2.SourceMetadata(writer="ggml-lite sdtrain"))]
    for tag, v, step, t in SCALARS:
        events.append(event_pb2.Event(wall_time=t, step=step, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=v)])))
    image = summary_pb2.Summary.Image(height=3, width=5, colorspace=3, encoded_image_string=png)
    events.append(event_pb2.Event(wall_time=1700000003.0, step=100, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="sample/0", image=image)])))
    buf = io.BytesIO()
    w = RecordWriter(buf)
    for e in events:
        w.write(e.SerializeToString())
    data = buf.getvalue()
    with open(os.path.join(OUT, "events.bin"), "wb") as f:
        f.write(data)
    # TensorBoard reads it back (a file in a folder, named as an event file).
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "events.out.tfevents.1700000000.host.1.0"), "wb") as f:
            f.write(data)
        acc = event_accumulator.EventAccumulator(d, size_guidance={"images": 0, "scalars": 0})
        acc.Reload()
        assert sorted(acc.Tags()["scalars"]) == sorted({s[0] for s in SCALARS}), acc.Tags()
        assert [e.step for e in acc.Scalars("loss/current")] == [1, 2, 300]
        assert acc.Images("sample/0")[0].encoded_image_string == png
    # What TensorBoard keeps of the file cut at every length (a writer killed mid-record): the
    # scalar events it reads, in order; the C++ reader must keep the same.
    cuts = []
    for n in range(len(data) + 1):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "events.out.tfevents.1700000000.host.1.0"), "wb") as f:
                f.write(data[:n])
            acc = event_accumulator.EventAccumulator(d, size_guidance={"images": 0, "scalars": 0})
            acc.Reload()
            kept = sorted((e.wall_time, e.step, t) for t in acc.Tags()["scalars"] for e in acc.Scalars(t))
            images = sum(len(acc.Images(t)) for t in acc.Tags()["images"])
            cuts.append({"bytes": n, "scalars": len(kept), "images": images})
    with open(os.path.join(OUT, "truncated.json"), "w") as f:
        json.dump(cuts, f, separators=(",", ":"))
    print("wrote", len(data), "bytes of", len(events), "events to", OUT)


if __name__ == "__main__":
    main()

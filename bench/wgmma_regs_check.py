#!/usr/bin/env python3
"""Flags register-A wgmma operands that the compiler gave away: reads the SASS of a cubin or
binary (`cuobjdump -sass`: the CUDA toolkit, or the nvidia-cuda-cuobjdump wheel where the toolkit
lacks it), and for every HGMMA whose A operand is a
register quad loaded by LDSM (ldmatrix) reports any other instruction that writes one of those
registers. Such a write between two uses of fragments held across a loop means the later HGMMA
reads something else (ptxas of CUDA 13.0 did this to attention_sm90.cuh's forward at d = 64,
bench/RESULTS.md, fifteenth session). Writes by LDSM (a reload) are allowed.

    python3 bench/wgmma_regs_check.py FILE [--filter SUBSTRING]

Exit status 1 when a kernel is flagged. A heuristic over straight SASS text, not a proof: it
does not follow control flow, so a register reused only after its last read also shows."""
import argparse
import re
import subprocess
import sys

INS = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
DEST = re.compile(r"(?:@!?U?P[T\d]\s+)?([A-Z][A-Z0-9_.]*)\s+R(\d+)\b")
LDSM = re.compile(r"(?:@!?P\d\s+)?LDSM\.16\.M88\.4\s+R(\d+),")
HGMMA_RS = re.compile(r"(?:@!?U?P\d\s+)?HGMMA\.\S+\s+R\d+,\s*R(\d+),")
NO_DEST = ("ST", "RED", "ATOM", "BAR", "HGMMA", "LDSM")


def kernels(sass):
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name, body = part.split("\n", 1)
        ins = [(int(m.group(1), 16), m.group(2)) for m in map(INS.match, body.split("\n")) if m]
        yield name.strip(), ins


def given_away(ins):
    loaded = {int(m.group(1)) for m in (LDSM.match(s) for _, s in ins) if m}
    quads = {int(m.group(1)) for m in (HGMMA_RS.match(s) for _, s in ins) if m} & loaded
    regs = {r + k for r in quads for k in range(4)}
    bad = []
    for addr, s in ins:
        m = DEST.match(s)
        if m and int(m.group(2)) in regs and not m.group(1).startswith(NO_DEST):
            bad.append(f"{addr:#06x}  {s}")
    return sorted(quads), bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--filter", default="", help="only kernels whose mangled name contains this")
    a = ap.parse_args()
    sass = subprocess.run(["cuobjdump", "-sass", a.file], check=True, capture_output=True, text=True).stdout
    flagged = 0
    for name, ins in kernels(sass):
        if a.filter not in name:
            continue
        quads, bad = given_away(ins)
        if not quads:
            continue
        print(f"{'FLAGGED' if bad else 'ok':8} {name}: A fragments in R{', R'.join(map(str, quads))}")
        for b in bad[:5]:
            print("           written by", b)
        flagged += bool(bad)
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())

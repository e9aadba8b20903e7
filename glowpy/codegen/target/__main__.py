"""python -m glowpy.codegen.target -target=... -mcpu=...: the resolved target as JSON (a small
manual helper)."""
import argparse
import json
import sys

from glowpy.codegen.target.options import TargetError
from glowpy.codegen.target.resolve import resolve_target

ap = argparse.ArgumentParser(description="resolve glowpy target options")
ap.add_argument("-target")
ap.add_argument("-mcpu")
ap.add_argument("-march")
ap.add_argument("-mattr")
ap.add_argument("-float-abi", dest="float_abi")
ap.add_argument("-relocation-model", dest="reloc", default="static")
ap.add_argument("-code-model", dest="cmodel", default="small")
a = ap.parse_args()
try:
    s = resolve_target(a.target, a.mcpu, a.march, a.mattr, a.float_abi, a.reloc, a.cmodel)
except TargetError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
print(json.dumps(dict(s.describe(), pointer_bits=s.pointer_bits,
                      is_host=s.is_host, fpu=s.fpu), indent=2))

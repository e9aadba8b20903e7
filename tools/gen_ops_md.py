"""Writes docs/ops.md (the supported ONNX ops) from the op registry.

    python tools/gen_ops_md.py          # rewrite docs/ops.md
    python tools/gen_ops_md.py --check  # exit 1 if docs/ops.md is out of date
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from glowpy.oplist import render_markdown  # noqa: E402

PATH = os.path.join(REPO, "docs", "ops.md")


def main(argv):
    text = render_markdown()
    if "--check" in argv:
        with open(PATH) as f:
            current = f.read()
        if current != text:
            print(f"{PATH} is out of date; run python tools/gen_ops_md.py", file=sys.stderr)
            return 1
        return 0
    with open(PATH, "w") as f:
        f.write(text)
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

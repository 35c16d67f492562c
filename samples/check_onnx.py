#!/usr/bin/python3
"""Validates ONNX models with ONNX's own checker (full_check also runs strict
shape inference). Used by the build after generating each sample; on failure
the model is deleted so that the next build regenerates it.

usage: check_onnx.py [--delete-on-failure] model.onnx...
"""
import os
import sys

import onnx


def main(argv):
    delete = "--delete-on-failure" in argv
    paths = [a for a in argv if a != "--delete-on-failure"]
    if not paths:
        print(__doc__, file=sys.stderr)
        return 1
    failed = 0
    for path in paths:
        try:
            model = onnx.load(path)
            onnx.checker.check_model(model, full_check=True)
        except Exception as e:  # the checker raises several exception types
            print(f"{path}: onnx checker failed: {e}", file=sys.stderr)
            failed += 1
            if delete and os.path.exists(path):
                os.remove(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

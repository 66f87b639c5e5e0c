"""examples/train_gpt.py with torch.compile(backend="tpu"): each step's forward and backward
are one compiled program each.

    scripts/python.sh examples/train_gpt_compiled.py [--steps 5] [--mode defer] [--chip v6e]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from train_gpt import main  # noqa: E402

if __name__ == "__main__":
    main(default_compile=True)

"""A model zoo: real Hugging Face ``transformers`` architectures on device "tpu", against the CPU.

``python -m tpuemu.zoo`` prints the table (architecture x mode -> pass / mismatch / unsupported
operator / error); ``tpuemu.zoo.models.MODELS`` holds the architectures, ``tpuemu.zoo.check.run``
runs one, ``tpuemu.zoo.tolerance`` says what is compared and how closely.
"""

from .models import ENTRIES, MODELS  # noqa: F401

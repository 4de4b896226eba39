"""cadedit: edit code with a local model without re-typing what the edit keeps.

The pipeline (docs/design.md#layers): document -> prompt -> constrained decode with
copy splices -> program -> resolve -> diff. Stages that need no model never import torch.
"""

__version__ = "0.2.0"

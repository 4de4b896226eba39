"""cadedit: edit code with a local model without re-typing what the edit keeps.

The pipeline (see ARCHITECTURE in the docs): document -> prompt -> constrained decode with
copy splices -> program -> resolve -> diff. Stages that need no model never import torch.
"""

__version__ = "0.1.0"

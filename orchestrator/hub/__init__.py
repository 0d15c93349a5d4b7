"""Models from the Hugging Face Hub: ``orchestrator pull REPO[:QUANT_OR_FILE]`` and ``hf:`` paths
in models.yaml, on ``huggingface_hub`` and its shared cache (``$HF_HUB_CACHE``, by default
``~/.cache/huggingface/hub``), so other tools see the same files and ``models_dirs`` finds them.

Concern -> file:
    which files a quant or file name means (split parts, MTP head)   select.py
    the hub cache: where it is, what a source already has there      cache.py
    downloading: resume across runs, progress, sha256 check          pull.py
"""

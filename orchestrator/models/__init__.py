"""Model files: what a GGUF is (header, facts, memory need), the generated tiny model, and the
in-process llama.cpp runtime for its tokenizer and chat template.

Owns reading and writing GGUF files; knows nothing of models.yaml entries or processes.

Concern -> file:
    GGUF header reader (metadata, tensor infos)    gguf_header.py
    model facts: architecture, MTP head, forks     facts.py
    memory estimate (weights, KV, recurrent)       memory.py
    tiny MTP model: vocabulary, writer, demo       tiny.py
    tiny model: tensors and shapes                 tiny_weights.py
    tiny model: echo code and token map            tiny_echo.py
    tokenizer and chat template via libllama       runtime.py
"""

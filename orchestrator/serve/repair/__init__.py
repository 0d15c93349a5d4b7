"""Request and response repair: what lets any client's body through the Qwen chat template, and the
answer back in the shape the client expects. Pure functions on values (they import only
``orchestrator.errors`` and each other; an import-linter contract keeps it so).

=====================  ==============================================================
module                 what
=====================  ==============================================================
``chat.py``            chat request repair (every API's internal request is chat)
``tool_choice.py``     an object ``tool_choice`` as llama-server reads it
``stability.py``       cache-stable prompts: late system messages, volatile lines
``thinking.py``        who decides whether the model thinks
``thinking_only.py``   an answer that ended inside its thinking: continued once, else marked cut
``efforts.py``         reasoning effort onto the levels the chat template accepts
``clock.py``           a clock in the system prompt moved to the end of the prompt
``agent_errors.py``    context overflow and malformed history in the shapes agents read
``structured.py``      ``response_format`` honoured or refused
``token_probs.py``     per-token probabilities complete with drafting on
``llama_fields.py``    every field llama-server parses, checked (400s, not its 500s)
``response.py``        reasoning split from content in a whole answer
``stream.py``          the same for a stream
=====================  ==============================================================
"""

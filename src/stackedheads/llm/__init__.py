"""Large language models on the retrieval problem (Sec. 4, Fig. 2, App. A).

``backends`` turns requests into text (openai, llamacpp, hf); ``bench`` is the protocol
(questions, resample until acceptable) with ``runlog`` (the log, its identity, resuming),
``scoring`` (parse, count, Wilson intervals) and ``figure2``; ``models`` finds the
packaged GGUF models; ``export`` writes questions for lm-evaluation-harness and inspect_ai.
Heavy dependencies (openai, llama-cpp-python, transformers) are imported only when used.
"""

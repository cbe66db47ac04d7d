"""Embedding analysis of a stored run (seed 000, "Embedding Quality": semantic similarity,
clustering quality): `embedders.py` turns texts into vectors (the offline lexical default, or
any OpenAI-compatible `/v1/embeddings` endpoint, cached in the judge cache), `analysis.py`
measures question-to-gold against question-to-retrieved similarity, finds the cases whose
gold is far from the question and clusters the questions to show where failures gather,
and writes `embeddings.json` into the run folder (`evalkit embed`)."""

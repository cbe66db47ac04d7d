"""The reference chatbot: a small, real implementation of the /api/v1/ask contract."""

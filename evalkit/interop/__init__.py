"""Interop with the IR world: files other tools read (TREC run and qrels files).

`evalkit.interop.trec.export_trec` writes a stored run as TREC files, so trec_eval, pytrec_eval
or ranx can check evalkit's retrieval numbers; `evalkit.interop.importers.trec` reads TREC topics and
qrels back into an eval set.
"""

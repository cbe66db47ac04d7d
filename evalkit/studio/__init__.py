"""`evalkit serve-studio`: a local web workbench over the project's eval sets, notes and runs.

    project.StudioProject   what may be shown: eval sets, notes, runs, each found by name
    editing.edit_case       one edit of one case, at the version the page showed, or a Conflict
    views                   the pages' view models and the Jinja2 renderer
    grading                 grading a run's answers, through judges.grades (the terminal grader's door)
    reviewing               generated candidates into a new version, through review.ReviewSession
    fixing                  batch work: validate --fix's anchor fixes, label --accept-top (labeling's functions)
    asking                  a case page asking the chatbot now (labeler.retrieve)
    guard.Guard             who may talk to it: the token, same-origin only, CSRF, the CSP
    app.create_app          the Starlette routes behind the Guard
    server.serve            127.0.0.1 only, a token per start, printed with the URL

Starlette and uvicorn are imported by app.py and server.py only, which
only the command imports: `evalkit --help` and the rest of evalkit never load them.
"""

"""HTML reports: one self-contained file per report (inline CSS, JS, SVG and data; no network).

    page.render_page("run.html.j2", page=..., run=...) -> str   any template of templates/
    run.write_run_report("20260102T030405Z-1a2b3c")   -> Path  results/<id>/report.html
    compare.write_compare_report(a, b)                 -> Path  one comparison
    trend.write_trend_report("results")               -> Path  every run of a results folder

Templates autoescape everything; charts come from `charts` as Markup whose labels are
escaped. jinja2 is imported on first use, so importing this package stays cheap. The
package itself holds nothing: each report module imports `page`, never this package.
"""

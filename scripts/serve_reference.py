from evalkit.cli.serve_reference import app

if __name__ == "__main__":
    app()

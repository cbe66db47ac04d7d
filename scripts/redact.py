from evalkit.cli.redact import app

if __name__ == "__main__":
    app()

from evalkit.cli.report import app

if __name__ == "__main__":
    app()

from evalkit.cli.import_cases import app

if __name__ == "__main__":
    app()

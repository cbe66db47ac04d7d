from evalkit.cli.validate import app

if __name__ == "__main__":
    app()

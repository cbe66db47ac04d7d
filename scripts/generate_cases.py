from evalkit.cli.generate import app

if __name__ == "__main__":
    app()

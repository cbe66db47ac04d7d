from evalkit.cli.export import app

if __name__ == "__main__":
    app()

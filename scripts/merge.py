from evalkit.cli.merge import app

if __name__ == "__main__":
    app()

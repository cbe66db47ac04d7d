from evalkit.cli.repro import app

if __name__ == "__main__":
    app()

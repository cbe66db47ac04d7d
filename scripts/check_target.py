from evalkit.cli.check_target import app

if __name__ == "__main__":
    app()

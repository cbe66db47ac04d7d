from evalkit.cli.run_eval import app

if __name__ == "__main__":
    app()

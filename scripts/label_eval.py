from evalkit.cli.label_eval import app

if __name__ == "__main__":
    app()

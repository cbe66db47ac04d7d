from evalkit.cli.score_abstention import app

if __name__ == "__main__":
    app()

from evalkit.cli.score_retrieval import app

if __name__ == "__main__":
    app()

from evalkit.cli.judge_answers import app

if __name__ == "__main__":
    app()

from evalkit.cli.compare_runs import app

if __name__ == "__main__":
    app()

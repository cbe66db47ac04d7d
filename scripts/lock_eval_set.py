from evalkit.cli.lock_eval_set import app

if __name__ == "__main__":
    app()

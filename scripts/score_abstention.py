import sys
from pathlib import Path

# This checkout's evalkit, installed or not; evalkit.cli.door says what is missing if its dependencies are not.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from evalkit.cli.door import main  # noqa: E402

if __name__ == "__main__":
    main("score_abstention")

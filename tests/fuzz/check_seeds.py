#!/usr/bin/env python3
"""Proves the encoders' bytes did not change: runs fuzz_seeds into a temporary directory and compares every seed it
writes for the encoder-made corpora (control and data frames, journals, checkpoint tokens) with the one committed in
tests/fuzz/corpus/, byte for byte. A journal file of this version and a peer of this version must read what the
last one wrote; a format change regenerates the corpus on purpose (tests/fuzz/make_seeds.cc says how) and says so.
The manifest, tar and JPEG seeds are left out: they hold generated data, not an encoder's fixed output.

    tests/fuzz/check_seeds.py BUILD/bin/fuzz_seeds      # ctest runs it as fuzz_seeds_match_corpus
"""
import pathlib
import subprocess
import sys
import tempfile

TARGETS = ["control_frame", "data_frame", "journal", "checkpoint", "seal_trailer"]


def main():
    generator = sys.argv[1]
    corpus = pathlib.Path(__file__).resolve().parent / "corpus"
    problems = []
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([generator, out], check=True, stdout=subprocess.DEVNULL)
        for target in TARGETS:
            made = sorted((pathlib.Path(out) / target).iterdir())
            if not made:
                problems.append(f"{target}: fuzz_seeds wrote nothing")
            for seed in made:
                committed = corpus / target / seed.name
                if not committed.exists():
                    problems.append(f"{target}/{seed.name}: not in the committed corpus")
                elif committed.read_bytes() != seed.read_bytes():
                    problems.append(f"{target}/{seed.name}: the encoder's bytes differ from the committed seed")
    print("\n".join(problems + [f"seeds: {len(problems)} difference(s) in {', '.join(TARGETS)}"]))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

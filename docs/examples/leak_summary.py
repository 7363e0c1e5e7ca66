"""Summarize a run's leaks from the plugin's JSON report; exit 1 if any test leaked.

pytest --eagersession-json=eagersession.json
python leak_summary.py eagersession.json
"""

import json
import sys


def main(path):
    with open(path, encoding="utf-8") as handle:
        tests = json.load(handle)["tests"]
    leaky = [test for test in tests if test.get("leaks")]
    for test in leaky:
        total = sum(leak["nbytes"] or 0 for leak in test["leaks"])
        print(f"{test['nodeid']} ({test['strategy']}): {len(test['leaks'])} leaked, {total} B")
        for leak in test["leaks"]:
            print(f"  - {leak['summary']}")
            if leak["retained_by"]:
                print(f"    {leak['retained_by']}")
    print(f"{len(leaky)} of {len(tests)} tests leaked TensorFlow objects")
    return 1 if leaky else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""The demo's test: `python3 examples/check_average.py FILE` exits 0 when FILE's average() is right."""

import runpy
import sys

functions = runpy.run_path(sys.argv[1], run_name="checked")
average = functions["average"]
assert average([1, 2, 3]) == 2, f"average([1, 2, 3]) = {average([1, 2, 3])}, expected 2"
assert average([4.0]) == 4.0, f"average([4.0]) = {average([4.0])}, expected 4.0"
assert abs(average([0.5, 1.5, 2.5, 3.5]) - 2.0) < 1e-12, "average([0.5, 1.5, 2.5, 3.5]) should be 2.0"
print("average: ok")

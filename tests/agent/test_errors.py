# SPDX-License-Identifier: MIT
"""error_from_stderr (nbrun_agent.execution): the error output made for a
kernel that says a cell failed and writes the error only to standard error
(tslab for TypeScript and JavaScript)."""
import unittest
from unittest import mock

import agenttest  # noqa: F401 (the package on sys.path)

from nbrun_agent import execution


def stderr_cell(*texts, outputs=()):
    return {"cell_type": "code", "source": "", "metadata": {},
            "outputs": list(outputs) + [{"output_type": "stream", "name": "stderr", "text": t}
                                        for t in texts]}


def error_of(cell, kernel="tslab"):
    with mock.patch.object(execution, "KERNEL_NAME", kernel):
        execution.error_from_stderr(cell)
    errors = [o for o in cell["outputs"] if o["output_type"] == "error"]
    assert len(errors) == 1, cell["outputs"]
    return errors[0]


class ErrorFromStderrTest(unittest.TestCase):
    def test_an_exception_line(self):
        err = error_of(stderr_cell("TypeError: x.foo is not a function\n"
                                   "    at <anonymous>:1:3\n"))
        self.assertEqual((err["ename"], err["evalue"]), ("TypeError", "x.foo is not a function"))
        self.assertEqual(err["traceback"], ["TypeError: x.foo is not a function", "    at <anonymous>:1:3"])

    def test_uncaught_and_dotted_names(self):
        err = error_of(stderr_cell("Uncaught RangeError: Invalid array length\n"))
        self.assertEqual((err["ename"], err["evalue"]), ("RangeError", "Invalid array length"))
        err = error_of(stderr_cell("errors.MyException\n"))
        self.assertEqual((err["ename"], err["evalue"]), ("errors.MyException", "errors.MyException"))

    def test_a_typescript_diagnostic(self):
        text = "1:7 - Type 'string' is not assignable to type 'number'.\n"
        err = error_of(stderr_cell(text), "tslab")
        self.assertEqual((err["ename"], err["evalue"]),
                         ("TSError", "Type 'string' is not assignable to type 'number'."))
        err = error_of(stderr_cell("2:1 - ';' expected.\n"), "jslab")
        self.assertEqual((err["ename"], err["evalue"]), ("SyntaxError", "';' expected."))

    def test_the_first_error_line_counts(self):
        err = error_of(stderr_cell("warning: something\n", "ReferenceError: y is not defined\n",
                                   "TypeError: later\n"))
        self.assertEqual(err["ename"], "ReferenceError")

    def test_without_an_error_line(self):
        err = error_of(stderr_cell("something went wrong\n", "last words\n"))
        self.assertEqual((err["ename"], err["evalue"]), ("Error", "last words"))
        err = error_of(stderr_cell())
        self.assertEqual((err["ename"], err["evalue"], err["traceback"]), ("Error", "", []))

    def test_the_runtimes_own_lines_are_left_out(self):
        err = error_of(stderr_cell(
            "(node:12) Warning: something internal\n"
            "RangeError: boom\n"
            "    at f (/opt/nbrun/node/node_modules/tslab/dist/executor.js:1:1)\n"
            "    at <anonymous>:3:9\n"))
        self.assertEqual((err["ename"], err["evalue"]), ("RangeError", "boom"))
        self.assertEqual(err["traceback"], ["RangeError: boom", "    at <anonymous>:3:9"])

    def test_bounds(self):
        err = error_of(stderr_cell("".join("line %d\n" % i for i in range(80)) +
                                   "BigError: " + "v" * 2000 + "\n"))
        self.assertEqual(len(err["traceback"]), 50)
        self.assertEqual(len(err["evalue"]), 1000)
        err = error_of(stderr_cell("A%sError: x\n" % ("b" * 300)))
        self.assertEqual(len(err["ename"]), 200)

    def test_an_error_output_already_there_is_kept(self):
        mine = {"output_type": "error", "ename": "E", "evalue": "v", "traceback": []}
        cell = stderr_cell("TypeError: other\n", outputs=[mine])
        execution.error_from_stderr(cell)
        self.assertEqual([o["output_type"] for o in cell["outputs"]], ["error", "stream"])
        self.assertIs(cell["outputs"][0], mine)

    def test_stdout_is_not_read(self):
        cell = stderr_cell()
        cell["outputs"].append({"output_type": "stream", "name": "stdout", "text": "TypeError: no\n"})
        err = error_of(cell)
        self.assertEqual((err["ename"], err["evalue"]), ("Error", ""))


if __name__ == "__main__":
    unittest.main()

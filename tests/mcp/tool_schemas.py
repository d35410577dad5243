#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The function-calling schemas in schemas/ are what nbrun mcp advertises.

Usage: tool_schemas.py              the test: each schemas/tools.FORMAT.json
                                    equals `nbrun mcp --print-tools=FORMAT`
       tool_schemas.py --committed-form FORMAT   (scripts/schemas) stdin's
                                    output as it is committed, on stdout

The committed tools.mcp.json names the result document's schema by $ref
(schemas/result.schema.json, which the build embeds) instead of repeating it;
the test checks that every outputSchema printed is that file, less its $schema
and $id. Any other difference, a tool added, renamed, described or given
another argument without the files regenerated, fails.
"""
import json
import os
import subprocess
import sys

SRCDIR = os.environ.get("NBRUN_SRCDIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FORMATS = ["mcp", "openai", "anthropic", "arguments"]
RESULT_REF = "result.schema.json"


def committed_form(fmt, doc):
    if fmt == "mcp":
        for t in doc["tools"]:
            if "outputSchema" in t:
                t["outputSchema"] = {"$ref": RESULT_REF}
    return doc


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--committed-form":
        doc = committed_form(sys.argv[2], json.load(sys.stdin))
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        return 0
    nbrun = os.environ["NBRUN"]
    failures = 0

    def check(cond, what):
        nonlocal failures
        print(("ok: " if cond else "FAIL: ") + what, flush=True)
        failures += 0 if cond else 1

    with open(os.path.join(SRCDIR, "schemas", RESULT_REF)) as f:
        result_schema = json.load(f)
    result_schema.pop("$schema", None)
    result_schema.pop("$id", None)
    printed = {}
    for fmt in FORMATS:
        p = subprocess.run([nbrun, "mcp", "--print-tools=" + fmt], capture_output=True, text=True, timeout=60)
        check(p.returncode == 0, f"nbrun mcp --print-tools={fmt} exits 0 ({p.stderr.strip()})")
        printed[fmt] = json.loads(p.stdout)
    mcp = printed["mcp"]["tools"]
    names = [t["name"] for t in mcp]
    check(len(names) == len(set(names)) and {"run_python", "run_code", "run_notebook", "session_open",
                                               "session_execute", "session_close"} <= set(names),
          f"the tools, each once: {names}")
    outs = [t["outputSchema"] for t in mcp if "outputSchema" in t]
    check(outs and all(o == result_schema for o in outs),
          f"every outputSchema printed ({len(outs)}) is schemas/{RESULT_REF} less $schema and $id")
    # The three function-calling forms carry the same name, description and arguments as MCP's.
    by_name = {t["name"]: t for t in mcp}
    oa = printed["openai"]
    check([e["function"]["name"] for e in oa] == names and all(
        e["type"] == "function" and e["function"]["description"] == by_name[e["function"]["name"]]["description"]
        and e["function"]["parameters"] == by_name[e["function"]["name"]]["inputSchema"] for e in oa),
        "openai: {type: function, function: {name, description, parameters}} of every MCP tool")
    an = printed["anthropic"]
    check([e["name"] for e in an] == names and all(
        set(e) == {"name", "description", "input_schema"} and e["input_schema"] == by_name[e["name"]]["inputSchema"]
        for e in an), "anthropic: {name, description, input_schema} of every MCP tool")
    args = printed["arguments"]
    check(list(args) == names and all(
        a["$schema"] == "https://json-schema.org/draft/2020-12/schema" and a["type"] == "object"
        and a["properties"] == by_name[n]["inputSchema"]["properties"] for n, a in args.items()),
        "arguments: a JSON Schema 2020-12 document per tool, its properties MCP's")
    try:
        import jsonschema
        for n, a in args.items():
            jsonschema.Draft202012Validator.check_schema(a)
        jsonschema.Draft202012Validator(args["run_code"]).validate({"code": "1", "language": "r"})
        bad = list(jsonschema.Draft202012Validator(args["run_code"]).iter_errors({"code": "1", "language": "cobol"}))
        check(bool(bad), "arguments: each is a valid 2020-12 schema; run_code's refuses an unknown language")
    except ImportError:
        check(False, "python3-jsonschema is installed (scripts/setup)")
    for fmt in FORMATS:
        path = os.path.join(SRCDIR, "schemas", f"tools.{fmt}.json")
        with open(path) as f:
            committed = json.load(f)
        same = committed == committed_form(fmt, printed[fmt])
        check(same, f"schemas/tools.{fmt}.json is what nbrun mcp --print-tools={fmt} prints"
              + ("" if same else " (run scripts/schemas BUILD_DIR and commit the files)"))
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

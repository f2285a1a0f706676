"""The JUnit XML file (--orbench-junit): one testcase per gate check."""

from __future__ import annotations

from pytest_orbench.core.records import ResultsDocument


def junit_xml(results: ResultsDocument) -> str:
    """One testcase per gate check: a failed check fails, an inconclusive one errors."""
    from junit_xml import TestCase, TestSuite, to_xml_report_string

    from pytest_orbench.render.markdown_escape import visible

    cases = []
    for check in results.get("gate", {}).get("checks", []):
        # Names and messages can quote untrusted text (a dataset's name, an endpoint's error): CI pages show
        # them, so bidi and other invisible characters are written as [U+202E], not obeyed.
        name, message = visible(check["name"]), visible(check["message"])
        case = TestCase(name, classname=f"orbench.gate.{visible(check['dataset'])}", elapsed_sec=0.0, stdout=message)
        if check["outcome"] == "fail":
            case.add_failure_info(message=message, failure_type="regression")
        elif check["outcome"] == "inconclusive":
            case.add_error_info(message=message, error_type="inconclusive")
        cases.append(case)
    return str(to_xml_report_string([TestSuite("orbench-gate", cases)], prettyprint=True))

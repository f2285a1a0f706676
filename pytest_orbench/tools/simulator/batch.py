"""The simulator's OpenAI-compatible Files and Batch endpoints (`/v1/files`, `/v1/batches`).

A batch moves `validating` → `in_progress` → `completed` as it is retrieved (one step per retrieval
after the first, `batch_polls` retrievals in all), or `expired` with only part of its requests done.
Each request line is answered by the same assistant, judge and pipeline roles as a synchronous call;
a share of them fail (`batch_fail_rate`) and land in the error file, as do the ones an expiry left
undone. Output and error files are JSONL, one line per request, keyed by `custom_id`.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import default as email_policy
from typing import Any

Answer = Callable[[dict[str, Any]], tuple[int, Any]]  # a chat request body -> (HTTP status, JSON reply)


class BatchError(Exception):
    """A request the Files or Batch API would reject: (HTTP status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Batches:
    """Uploaded files and batches, in memory, for one simulator."""

    def __init__(self, polls: int = 3, fail_rate: float = 0.0, expire_share: float | None = None,
                 expire_count: int | None = None) -> None:
        self.polls = max(1, polls)
        self.fail_rate = fail_rate
        self.expire_share = expire_share  # None: batches complete; a share in [0, 1): they expire with that share done
        self.expire_count = expire_count  # with expire_share: only the first this many batches expire (None: all)
        self.lock = threading.Lock()
        self.files: dict[str, dict[str, Any]] = {}
        self.content: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.retrievals: dict[str, int] = {}
        self.requests: dict[str, list[dict[str, Any]]] = {}  # batch id -> its request lines, read when validated
        self.created = 0  # batches created (tests: a resumed run creates none)
        self.sizes: list[int] = []  # request lines of each batch, in the order created (once validated)
        self.numbers: dict[str, int] = {}  # batch id -> 1, 2, ... in the order created
        self.answered = 0  # batch request lines answered

    # -- files --------------------------------------------------------------------------------
    def upload(self, content_type: str, raw: bytes) -> dict[str, Any]:
        """POST /v1/files (multipart/form-data: purpose, file)."""
        if not content_type.startswith("multipart/form-data"):
            raise BatchError(400, "expected multipart/form-data with purpose and file")
        message = BytesParser(policy=email_policy).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
        fields: dict[str, tuple[str | None, bytes]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if isinstance(name, str) and isinstance(payload, bytes):
                fields[name] = (part.get_filename(), payload)
        if "file" not in fields:
            raise BatchError(400, "no file in the upload")
        purpose = fields.get("purpose", (None, b"batch"))[1].decode()
        return self.add_file(fields["file"][0] or "upload.jsonl", fields["file"][1], purpose)

    def add_file(self, filename: str, content: bytes, purpose: str) -> dict[str, Any]:
        file_id = "file-" + uuid.uuid4().hex[:24]
        record = {"id": file_id, "object": "file", "bytes": len(content), "created_at": int(time.time()),
                  "filename": filename, "purpose": purpose, "status": "processed"}
        with self.lock:
            self.files[file_id], self.content[file_id] = record, content
        return record

    def file(self, file_id: str) -> dict[str, Any]:
        if file_id not in self.files:
            raise BatchError(404, f"no such file: {file_id}")
        return self.files[file_id]

    def file_content(self, file_id: str) -> bytes:
        self.file(file_id)
        return self.content[file_id]

    # -- batches ------------------------------------------------------------------------------
    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/batches."""
        input_file = body.get("input_file_id")
        if not isinstance(input_file, str) or input_file not in self.files:
            raise BatchError(400, f"input_file_id {input_file!r} is not an uploaded file")
        if body.get("endpoint") != "/v1/chat/completions":
            raise BatchError(400, "this simulator batches /v1/chat/completions only")
        now = int(time.time())
        batch = {
            "id": "batch_" + uuid.uuid4().hex[:24], "object": "batch", "endpoint": body["endpoint"], "errors": None,
            "input_file_id": input_file, "completion_window": body.get("completion_window", "24h"),
            "status": "validating", "output_file_id": None, "error_file_id": None, "created_at": now,
            "in_progress_at": None, "expires_at": now + 86400, "finalizing_at": None, "completed_at": None,
            "failed_at": None, "expired_at": None, "cancelling_at": None, "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0}, "metadata": body.get("metadata"),
        }
        with self.lock:
            self.batches[batch["id"]] = batch
            self.retrievals[batch["id"]] = 0
            self.created += 1
            self.numbers[batch["id"]] = self.created
        return batch

    def retrieve(self, batch_id: str, answer: Answer) -> dict[str, Any]:
        """GET /v1/batches/{id}: one step further each time, the work done at the last step."""
        with self.lock:
            if batch_id not in self.batches:
                raise BatchError(404, f"no such batch: {batch_id}")
            batch = self.batches[batch_id]
            self.retrievals[batch_id] += 1
            polls = self.retrievals[batch_id]
        if batch["status"] == "validating" and polls >= 1:
            self.requests[batch_id] = self._lines(batch["input_file_id"])
            batch.update(status="in_progress", in_progress_at=int(time.time()))
            batch["request_counts"]["total"] = len(self.requests[batch_id])
            with self.lock:
                self.sizes.append(len(self.requests[batch_id]))
        if batch["status"] == "in_progress" and polls >= self.polls:
            self._run(batch, answer)
        return batch

    def cancel(self, batch_id: str) -> dict[str, Any]:
        if batch_id not in self.batches:
            raise BatchError(404, f"no such batch: {batch_id}")
        batch = self.batches[batch_id]
        if batch["status"] in ("validating", "in_progress"):
            batch.update(status="cancelled", cancelled_at=int(time.time()))
        return batch

    def _lines(self, file_id: str) -> list[dict[str, Any]]:
        lines = []
        for number, text in enumerate(self.content[file_id].decode().splitlines(), 1):
            if text.strip():
                try:
                    lines.append(json.loads(text))
                except ValueError:
                    raise BatchError(400, f"line {number} of {file_id} is not JSON") from None
        return lines

    def _run(self, batch: dict[str, Any], answer: Answer) -> None:
        from pytest_orbench.tools.simulator.roles import unit

        lines = self.requests.pop(batch["id"])
        expires = self.expire_share is not None and (self.expire_count is None
                                                     or self.numbers[batch["id"]] <= self.expire_count)
        done = int(len(lines) * (self.expire_share or 0.0)) if expires else len(lines)
        output: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for index, line in enumerate(lines):
            custom_id = str(line.get("custom_id"))
            request_id = "req_" + uuid.uuid4().hex[:12]
            if index >= done:
                errors.append({"id": "batch_req_" + uuid.uuid4().hex[:12], "custom_id": custom_id, "response": None,
                               "error": {"code": "batch_expired", "message": "This request could not be executed "
                                         "before the completion window expired."}})
                continue
            if unit(custom_id, "batch-fail") < self.fail_rate:
                errors.append({"id": "batch_req_" + uuid.uuid4().hex[:12], "custom_id": custom_id,
                               "response": {"status_code": 500, "request_id": request_id,
                                            "body": {"error": {"message": "The server had an error processing "
                                                                          "this request", "type": "server_error"}}},
                               "error": None})
                continue
            status, body = answer(line.get("body") or {})
            record = {"id": "batch_req_" + uuid.uuid4().hex[:12], "custom_id": custom_id,
                      "response": {"status_code": status, "request_id": request_id, "body": body}, "error": None}
            (output if status == 200 else errors).append(record)
        with self.lock:
            self.answered += len(output)
        batch["request_counts"].update(completed=len(output), failed=len(errors))
        name = batch["id"]
        if output:
            batch["output_file_id"] = self.add_file(f"{name}_output.jsonl", _jsonl(output), "batch_output")["id"]
        if errors:
            batch["error_file_id"] = self.add_file(f"{name}_error.jsonl", _jsonl(errors), "batch_output")["id"]
        now = int(time.time())
        if not expires:
            batch.update(status="completed", finalizing_at=now, completed_at=now)
        else:
            batch.update(status="expired", expired_at=now)


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()

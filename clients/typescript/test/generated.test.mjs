// The committed generated files are current: src/openapi.ts is what
// openapi-typescript makes of api/openapi.yaml, and dist/ what tsc makes of
// src/. Regenerate with `npm run generate && npm run build`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const bin = (name) => join(root, "node_modules", ".bin", name);

test("src/openapi.ts is generated from api/openapi.yaml", () => {
  const out = join(mkdtempSync(join(tmpdir(), "coalesce-ts-")), "openapi.ts");
  execFileSync(bin("openapi-typescript"), [join(root, "../../api/openapi.yaml"), "-o", out], { stdio: "pipe" });
  assert.equal(readFileSync(join(root, "src/openapi.ts"), "utf8"), readFileSync(out, "utf8"),
    "src/openapi.ts is stale: run npm run generate (then npm run build) in clients/typescript");
});

test("dist/ is built from src/", () => {
  const out = mkdtempSync(join(tmpdir(), "coalesce-ts-dist-"));
  execFileSync(bin("tsc"), ["-p", root, "--outDir", out], { stdio: "pipe" });
  const files = readdirSync(out).sort();
  assert.deepEqual(readdirSync(join(root, "dist")).sort(), files);
  for (const f of files) {
    assert.equal(readFileSync(join(root, "dist", f), "utf8"), readFileSync(join(out, f), "utf8"), `dist/${f} is stale: run npm run build`);
  }
});

const test = require("node:test");
const assert = require("node:assert");
const isNumber = require("is-number");
const { double } = require("../index.js");

test("double gives a number twice as large", () => {
  assert.ok(isNumber(double(21)));
  assert.strictEqual(double(21), 42);
});

function double(value) {
  return value * 2;
}

module.exports = { double };

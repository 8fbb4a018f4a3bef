package mathx

import "testing"

func TestClamp(t *testing.T) {
	cases := []struct{ v, want int }{{-5, 0}, {5, 5}, {50, 10}}
	for _, c := range cases {
		if got := Clamp(c.v, 0, 10); got != c.want {
			t.Errorf("Clamp(%d, 0, 10) = %d, want %d", c.v, got, c.want)
		}
	}
}

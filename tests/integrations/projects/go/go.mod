module example.com/harness/mathx

go 1.19

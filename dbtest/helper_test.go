package dbtest_test

const helperEnv = "OUTBOXER_TEST_HELPER"

func runHelper(string) int { return 2 }

package template

// For the external tests (package template_test).
var (
	OpenData    = openData
	TestRecords = testRecords
)

# Offline command-line tools.
TOOLS += $(BUILD)/bin/srt-generate
TOOLS += $(BUILD)/bin/srt-bench-grammar

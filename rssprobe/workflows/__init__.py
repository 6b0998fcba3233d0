"""What the commands do: start runs (run), decide a gate (gate), tell what a reference names and compare two
(inspect), what this machine can measure (doctor), what a report page shows (report). Each returns a
result; the commands hand it to the reporters."""

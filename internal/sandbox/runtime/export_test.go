package runtime

// RunscHostTasks is what a runsc sandbox's host pids cgroup holds beside its tasks.
const RunscHostTasks = runscHostTasks

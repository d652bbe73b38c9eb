/* The pod sandbox's pause process for the test cluster's real node (no pause
 * image can be pulled here): PID 1 of the pod, it reaps orphans and exits on
 * SIGINT/SIGTERM. Built static into a one-file image by k8s/image/build.sh pause. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { (void)sig; _exit(0); }

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {0}, child = {0};
  stop.sa_handler = on_stop;
  sigaction(SIGINT, &stop, 0);
  sigaction(SIGTERM, &stop, 0);
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &child, 0);
  for (;;) pause();
}

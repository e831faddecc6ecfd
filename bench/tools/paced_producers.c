/*
 * paced_producers: N librdkafka producer instances (N client connections) in one thread, producing a
 * total of -c messages either paced on a schedule (-r msgs/s over all instances) or as fast as the
 * broker takes them (-r 0). Built by `make bench-tools` beside rdkafka_performance; used by
 * bench/c_client_curves.py.
 *
 * Why not rdkafka_performance alone: its -r sleeps a fixed time after each message (busy-waiting below
 * 100 us), so its rate is 1 / (sleep + the cost of a message) - 140k msgs/s for -r 200000 on a loaded
 * two-core machine - and the spin takes a whole core from the broker under test; and it runs one
 * instance per process, so 1,000 connections would be 1,000 processes. Here one thread wakes once a
 * tick (-T us), produces every message due by then (message i is due at i / rate s after the start) and
 * sleeps again: the rate holds while the client uses a few percent of a core, and a stalled client
 * catches up instead of lowering the load. With -l each payload starts with "LATENCY:<wall-clock us>",
 * rdkafka_performance's own format, so its consumer (-C -l) measures the end-to-end latency.
 *
 * Before the measured messages each instance sends one "warmup" message and all are awaited, so every
 * connection is open when the clock starts; a line "% warm ..." says so. The last line is the summary:
 *   % paced_producers: <n> instances, <c> produced, <d> delivered, <f> failed in <ms> ms: <rate> msgs/s ...
 *
 * Usage: paced_producers -b host:port -t topic [-n instances] [-c count] [-s size] [-r rate] [-p partition]
 *                        [-a acks] [-l] [-T tick_us] [-X name=value ...]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long delivered, failed;
static int64_t last_delivery_us;
static char first_error[256];

static int64_t mono_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint64_t wall_us(void) {
        /* rdkafka_performance's wall_clock(): its consumer subtracts this from its own. */
        struct timeval tv;
        gettimeofday(&tv, NULL);
        return (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
        (void)rk;
        (void)opaque;
        if (msg->err) {
                if (!failed++)
                        snprintf(first_error, sizeof(first_error), "%s", rd_kafka_err2str(msg->err));
        } else
                delivered++;
        last_delivery_us = mono_us();
}

static void die(const char *what) {
        fprintf(stderr, "%% paced_producers: %s\n", what);
        exit(2);
}

/* Serve delivery reports of every instance until `want` messages are settled or `timeout_us` passes. */
static int settle(rd_kafka_t **rks, int n, long want, int64_t timeout_us) {
        int64_t deadline = mono_us() + timeout_us;
        while (delivered + failed < want) {
                if (mono_us() > deadline)
                        return -1;
                for (int i = 0; i < n; i++)
                        rd_kafka_poll(rks[i], 0);
                if (delivered + failed < want)
                        usleep(1000);
        }
        return 0;
}

int main(int argc, char **argv) {
        const char *brokers = NULL, *topic = NULL, *acks = "-1";
        int n = 1, size = 100, latency = 0, opt;
        int32_t partition = RD_KAFKA_PARTITION_UA;
        long count = 1000000, tick_us = 1000;
        double rate = 0;
        char errstr[512];
        rd_kafka_conf_t *base = rd_kafka_conf_new();

        while ((opt = getopt(argc, argv, "b:t:n:c:s:r:p:a:lT:X:")) != -1) {
                switch (opt) {
                case 'b': brokers = optarg; break;
                case 't': topic = optarg; break;
                case 'n': n = atoi(optarg); break;
                case 'c': count = atol(optarg); break;
                case 's': size = atoi(optarg); break;
                case 'r': rate = strtod(optarg, NULL); break;
                case 'p': partition = (int32_t)atoi(optarg); break;
                case 'a': acks = optarg; break;
                case 'l': latency = 1; break;
                case 'T': tick_us = atol(optarg); break;
                case 'X': {
                        char *eq = strchr(optarg, '=');
                        if (!eq)
                                die("-X takes name=value");
                        *eq = '\0';
                        if (rd_kafka_conf_set(base, optarg, eq + 1, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
                                die(errstr);
                        break;
                }
                default: die("usage: -b brokers -t topic [-n instances] [-c count] [-s size] [-r rate] "
                             "[-p partition] [-a acks] [-l] [-T tick_us] [-X name=value]");
                }
        }
        if (!brokers || !topic || n < 1 || count < 0 || size < 32 || tick_us < 1)
                die("need -b and -t; -n >= 1, -s >= 32 (room for the latency stamp), -T >= 1");
        if (rd_kafka_conf_set(base, "bootstrap.servers", brokers, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK ||
            rd_kafka_conf_set(base, "acks", acks, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
                die(errstr);
        rd_kafka_conf_set_dr_msg_cb(base, on_delivery);

        rd_kafka_t **rks = calloc((size_t)n, sizeof(*rks));
        rd_kafka_topic_t **rkts = calloc((size_t)n, sizeof(*rkts));
        for (int i = 0; i < n; i++) {
                rd_kafka_conf_t *conf = rd_kafka_conf_dup(base);
                if (!(rks[i] = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr))))
                        die(errstr);
                rkts[i] = rd_kafka_topic_new(rks[i], topic, NULL);
        }
        rd_kafka_conf_destroy(base);

        int64_t began = mono_us();
        for (int i = 0; i < n; i++)
                if (rd_kafka_produce(rkts[i], partition, RD_KAFKA_MSG_F_COPY, "warmup", 6, NULL, 0, NULL) == -1)
                        die(rd_kafka_err2str(rd_kafka_last_error()));
        if (settle(rks, n, n, 120 * 1000000LL))
                die("warm-up messages not delivered within 120 s");
        if (failed) {
                fprintf(stderr, "%% paced_producers: warm-up failed: %s\n", first_error);
                return 2;
        }
        printf("%% warm: %d instances connected in %" PRId64 " ms\n", n, (mono_us() - began) / 1000);
        fflush(stdout);
        delivered = 0;

        char *payload = malloc((size_t)size);
        for (int i = 0; i < size; i++)
                payload[i] = (char)('a' + i % 26);
        /* Each tick polls a slice of the instances, so 1,000 of them cost no more per tick than 100. */
        int poll_slice = n < 100 ? n : 100, next_poll = 0;
        long sent = 0, backpressure = 0;
        int64_t start = mono_us(), tick = 0;
        while (sent < count) {
                long due = count;
                if (rate > 0) {
                        due = (long)((double)(mono_us() - start) * rate / 1e6) + 1;
                        if (due > count)
                                due = count;
                }
                /* Unpaced: a round of up to 10,000 messages between polls. */
                long limit = rate > 0 ? due : (sent + 10000 < count ? sent + 10000 : count);
                while (sent < limit) {
                        int i = (int)(sent % n);
                        if (latency)
                                snprintf(payload, (size_t)size, "LATENCY:%" PRIu64, wall_us());
                        if (rd_kafka_produce(rkts[i], partition, RD_KAFKA_MSG_F_COPY, payload, (size_t)size, NULL, 0,
                                             NULL) == -1) {
                                if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                                        die(rd_kafka_err2str(rd_kafka_last_error()));
                                backpressure++;
                                rd_kafka_poll(rks[i], 1);
                                continue;
                        }
                        sent++;
                }
                for (int k = 0; k < poll_slice; k++) {
                        rd_kafka_poll(rks[next_poll], 0);
                        next_poll = (next_poll + 1) % n;
                }
                if (rate > 0 && sent < count) {
                        tick++;
                        int64_t wake = start + tick * tick_us;
                        int64_t now = mono_us();
                        if (wake > now) {
                                struct timespec ts = {(time_t)((wake - now) / 1000000), (long)((wake - now) % 1000000) * 1000};
                                while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
                                        ;
                        } else
                                tick = (now - start) / tick_us;   /* behind: catch up now, then back on the grid */
                }
        }
        int64_t produced_us = mono_us() - start;
        if (settle(rks, n, count, 300 * 1000000LL))
                fprintf(stderr, "%% paced_producers: %ld of %ld settled after 300 s\n", delivered + failed, count);
        int64_t ms = (last_delivery_us - start) / 1000;
        if (ms < 1)
                ms = 1;
        printf("%% paced_producers: %d instances, %ld produced, %ld delivered, %ld failed in %" PRId64
               " ms: %.0f msgs/s (produce calls took %" PRId64 " ms, %ld backpressure)%s%s\n",
               n, sent, delivered, failed, ms, delivered * 1000.0 / (double)ms, produced_us / 1000, backpressure,
               failed ? ", first error: " : "", failed ? first_error : "");
        fflush(stdout);
        for (int i = 0; i < n; i++) {
                rd_kafka_topic_destroy(rkts[i]);
                rd_kafka_destroy(rks[i]);
        }
        free(payload);
        free(rks);
        free(rkts);
        return failed || delivered != count ? 1 : 0;
}

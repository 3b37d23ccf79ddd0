#!/bin/sh
# The official image's start-up, in short: options alone mean redis-server with them; protected
# mode off unless asked for; as root, hand /data to redis and drop to it.
set -eu
if [ "${1#-}" != "$1" ]; then
    set -- redis-server "$@"
fi
if [ "$1" = redis-server ]; then
    case " $* " in
        *" --protected-mode "*) ;;
        *) set -- "$@" --protected-mode no ;;
    esac
    if [ "$(id -u)" = 0 ]; then
        chown -R redis:redis /data
        exec setpriv --reuid=redis --regid=redis --init-groups "$@"
    fi
fi
exec "$@"

# RMS feedback service: one image for the web app (gunicorn), the Celery worker and Celery beat.
# See docs/DOCKER.md.
FROM python:3.11-slim

# PYTHONPATH=/app: the code that runs is the copy in /app (settings derive BASE_DIR, and so
#   templates/ and staticfiles/, from where rms/settings.py is), not the copy `pip install .` puts
#   in site-packages, which is there for the dependencies and console scripts.
# RMS_VAR_DIR: settings.py creates VAR_DIR at import; /app/var is owned by the non-root user.
# RMS_REQUIRE_SECRET=1: refuse to start without SECRET_KEY when DEBUG is off
#   (docker-compose.yml always passes one).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONPATH=/app \
    DJANGO_SETTINGS_MODULE=rms.settings \
    RMS_VAR_DIR=/app/var \
    RMS_REQUIRE_SECRET=1

# User rms (uid/gid 1000, used numerically by USER below so that runAsNonRoot can check it).
# A writable home: gunicorn (>= 25.1) puts its control socket in ~/.gunicorn/ by default.
RUN groupadd --system --gid 1000 rms \
    && useradd --system --uid 1000 --gid rms --create-home --home-dir /home/rms \
        --shell /usr/sbin/nologin rms

WORKDIR /app

# The project (see .dockerignore for what stays out), then the package and its dependencies.
# pip builds in-tree, so its build/ and *.egg-info leftovers are removed.
COPY . .
RUN pip install --no-cache-dir . \
    && rm -rf build ./*.egg-info

# Static files are collected at build time into /app/staticfiles (served by WhiteNoise).
# The dummy SECRET_KEY exists only for this one command; it is not in the image's environment.
RUN SECRET_KEY=collectstatic-build-only-not-a-secret DEBUG=false \
        python manage.py collectstatic --noinput \
    && rm -rf /app/var \
    && install -d -o rms -g rms -m 0750 /app/var

USER 1000:1000

EXPOSE 8000

CMD ["gunicorn", "rms.wsgi:application", "-b", "0.0.0.0:8000", "-w", "3", "-k", "gthread", "--threads", "4", "--access-logfile", "-"]

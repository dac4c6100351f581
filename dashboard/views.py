"""Operator dashboard (the full dashboard is its own issue); for now the overview stub."""

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.shortcuts import render

from rms.models import Namespace


@login_required
def overview(request):
    namespaces = Namespace.objects.annotate(n_objects=Count("memory_objects")).order_by("name")
    return render(request, "dashboard/overview.html", {"namespaces": namespaces})
